"""web layer of imagesvc."""
