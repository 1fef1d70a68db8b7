"""Demo and test corpora built from espeak-ng: free phoneme alignments, reproducible bytes."""
