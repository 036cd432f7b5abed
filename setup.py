"""Ship the native sources inside the wheel: native/ stays the single source of truth, and
build_py copies it (with CMakeLists.txt) to phantora_prof/native_src/ for non-editable
installs, where the loader finds it."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithNativeSources(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # editable installs build from <repo>/native
        dest = Path(self.build_lib) / "phantora_prof" / "native_src"
        sources = [ROOT / "CMakeLists.txt"] + sorted(p for p in (ROOT / "native").rglob("*") if p.is_file())
        for src in sources:
            target = dest / src.relative_to(ROOT)
            self.mkpath(str(target.parent))
            self.copy_file(str(src), str(target))


setup(cmdclass={"build_py": BuildPyWithNativeSources})
