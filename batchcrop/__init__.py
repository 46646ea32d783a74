"""batchcrop: smart-crop catalogue images into several aspect ratios, as leased batch work."""

__version__ = "0.1.0"
