"""每个练习模块一份快照用例：CASES = [Case(name, func, inputs), ...]。"""
