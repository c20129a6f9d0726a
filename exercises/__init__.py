"""你的练习。每个函数都是空桩：读对应课程的 README，实现它，再用
`pytest --impl exercises tests/...` 检查。"""
