"""The LLVM CPU backend (paper section 5). Not registered as a target until it compiles code."""
