"""The model a run trains: which one, its folder, its tokenizer, loading it, and its optimizer.

A model folder is checked before any weight is loaded; a GGUF file can become one.

A lesson imports: `models.load_model` / `model_spec` / `setup_device` / `load_for_training`,
`tokenizer.load_qwen`, `optim.make_optimizer`, `model_dir.ModelDirError`;
a learner runs `python -m common.model.model_dir` (check a folder, or `from-gguf`).
Modules: models, model_dir, gguf_convert, tokenizer, optim.
"""
