"""voxledger: provable fine-tuning pipelines for text-to-speech."""
