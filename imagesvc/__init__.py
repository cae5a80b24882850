"""imagesvc: the image and gallery microservice of a digital library of rare pre-modern books."""

__version__ = "0.1.0"
__all__ = ["__version__"]
