"""The input pipeline's parts (input_pipeline.py is the entry): images, sources, augmentation."""
