"""The ONNX front end: the loader, the importer and one converter per op family."""
