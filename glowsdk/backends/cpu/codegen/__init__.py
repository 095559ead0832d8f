"""LLVM code generation helpers: element types, loops, and the module built from a Program."""
