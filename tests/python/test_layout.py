"""The ctypes structs of python/flashcl/_lib.py against the C compiler's layout of flashcl.h
(the layout program's JSON, FLASHCL_LAYOUT: CTest passes it)."""
import ctypes
import json
import os
import subprocess

from flashcl import _lib


def test_structs_match_the_header():
    layout = json.loads(subprocess.run([os.environ["FLASHCL_LAYOUT"]], check=True,
                                       capture_output=True, text=True).stdout)
    formats = {name: tuple(v) for name, v in layout.pop("KV_FORMATS").items()}
    assert formats == _lib.KV_FORMATS
    fields = {"in_": "in"}
    for struct, want in layout.items():
        cls = getattr(_lib, struct)
        assert ctypes.sizeof(cls) == want["sizeof"], struct
        for name, _ in cls._fields_:
            if fields.get(name, name) in want:
                assert getattr(cls, name).offset == want[fields.get(name, name)], (struct, name)
        mirrored = {fields.get(name, name) for name, _ in cls._fields_}
        assert set(want) - {"sizeof"} <= mirrored, struct
