"""The data both training and evaluation read: the checkable tasks and their answer checker, Python
functions cut from source files, the installed source files and the one train / held-out split.

`llada.train` and `llada.eval` import this package; it imports neither of them.
"""
