"""ingest layer of imagesvc."""
