"""glowsdk's version, in a module of its own: any layer can name it without importing the package's face
(glowsdk/__init__.py), which hands on the API from the top of the layers."""

__version__ = "0.1.0"
