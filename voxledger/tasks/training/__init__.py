"""Backend-independent training: guarded checkpoints, exact resume, early stopping, receipts."""
