"""Gallery, collection and vector routes: each one tool, its query parameters read through the tool's schema."""

from __future__ import annotations

from imagesvc.web.rest import tool_route

__all__ = ["book_images", "collection", "collections", "gallery", "image", "vectors"]

gallery = tool_route("search_images")
image = tool_route("get_image")
book_images = tool_route("get_book_images")
collections = tool_route("list_collections")
collection = tool_route("get_collection")
vectors = tool_route("get_vectors")
