"""IIIF: Image API parsing and rendering, sources and delivery, derivative cache, Presentation 3."""
