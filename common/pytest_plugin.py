"""Empty on purpose: the course's pytest plugin lives in tests/pytest_plugin.py (loaded by the root conftest.py).

Installs made before it moved registered this module as a ``pytest11`` entry point. After a ``git pull``,
pytest still imports it at start-up, and without this file it stops with ModuleNotFoundError before
collecting anything. Re-running ``pip install -e ".[dev]"`` drops the stale entry point; until then this
module keeps such a checkout working. It defines no hooks, so the plugin is never registered twice.
"""
