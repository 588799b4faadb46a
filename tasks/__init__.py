"""Tasks: data, tokenizer + model + head wiring, loss, metrics and inference, one module per task."""
