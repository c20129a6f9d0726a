"""The VRAM story of one GRPO step on one GPU, one module per job:

    shapes    the model shapes (Qwen3, Qwen2.5; or any dense Qwen config.json) and parameter counts
    ledger    bytes per line and per phase of one step (arithmetic over the shapes; no torch)
    fit       the verdict (fits / tight / no), the searches behind it, the fit table
    plan      the ledger's settings for a training run, and full-vs-LoRA for a model folder
    report    the Chinese printout: `python -m common.vram`
    measure   measuring on a real GPU (peak of a block, a 32 GiB cap on a bigger card); needs torch
    decode_shape  the fast decoder's static shapes (rows, cache slots): what
              common.decode.fast_decode allocates and the ledger counts

A lesson imports: `ledger.ledger` / `Settings`, `measure.cap_to_gpu_gb` / `peak_memory`,
`report.cell`; a learner runs `python -m common.vram`.

Printing the fit table imports no torch (tests/common/test_vram.py checks it).
"""
