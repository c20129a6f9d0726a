"""The run folder: one writer, checkpoints, metrics, evaluations, a resume that never starts over.

Every file is written atomically; a non-finite step stops before it reaches a checkpoint.

A lesson imports: `run_folder.RunFolder` / `exit_cleanly`, `metrics.read_metrics`,
`json_files.read_json` / `read_jsonl`, `checkpoint.load_checkpoint`, `provenance.provenance`.
Modules: run_folder, out_dir, checkpoint, metrics, json_files, atomic_io, bad_step, finite_guard,
provenance, random_streams.
"""
