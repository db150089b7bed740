"""Weather tools described with `manifest` decorators and Chinese descriptions."""
