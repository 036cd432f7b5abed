"""Run a script whose `torch.compile` calls take a given mode: `python compile_mode.py MODE
SCRIPT [ARGS...]` (MODE "default" leaves them as they are). For the reference gpt.py, which
has a --compile flag but no mode option (issue #16, tools/holdout/compare.py's reduce-overhead
cases); runs the same on a GPU machine and under phantora-prof."""
import os
import runpy
import sys

import torch

mode = sys.argv.pop(1)
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
_compile = torch.compile


def compile_with_mode(*args, **kwargs):
    if mode != "default":
        kwargs.setdefault("mode", mode)
    return _compile(*args, **kwargs)


torch.compile = compile_with_mode
runpy.run_path(sys.argv[0], run_name="__main__")
