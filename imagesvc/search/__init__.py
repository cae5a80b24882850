"""search layer of imagesvc."""
