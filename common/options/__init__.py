"""The words of the course's command lines: the parser, each setting's names, the named presets.

Torch-free, importing nothing else of the course, so every other package can use them.

A lesson imports: `cli.CourseParser`, `choices.AGGREGATIONS` / `TIS_LEVELS`,
`presets.gpu_recipe` / `PresetError`.
Modules: cli, choices, presets.
"""
