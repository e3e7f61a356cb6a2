"""Model layer: the model protocol, message types and providers."""
