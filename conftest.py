"""pytest 在解析命令行之前先读仓库根目录的这个文件：课程的插件（--impl 和中文的失败报告，
tests/pytest_plugin.py）在这里注册。不能只放在 tests/conftest.py 里：`pytest --impl exercises`
不给路径时，pytest 先把 exercises 当成要测的路径，只读那条路上的 conftest.py（这一个在路上，
tests/ 里的不在），读不到插件就不认识 --impl。tests/ 由 pyproject.toml 的 pythonpath 放进 sys.path。
"""

pytest_plugins = ["pytest_plugin"]
