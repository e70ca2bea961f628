"""`argus verify FILE --op attention --causal`: a user's kernel checked against the op's read set (issue 42)."""
from __future__ import annotations

import json
from pathlib import Path

from argus_inductor.cli import main

from .suite import ATTENTION


def test_verify_op_checks_the_read_set(tmp_path: Path, capsys) -> None:
    good = tmp_path / "attn.py"
    good.write_text(ATTENTION)
    args = ["--shape", "Z=2,H=4,HK=2,S=50,T=50,D=64", "--policy", "BM=32,BN=32,BD=64,CAUSAL=1",
            "--assume", "H % HK == 0", "--assume", "D <= BD"]
    assert main(["verify", str(good), *args, "--op", "attention", "--causal"]) == 0, capsys.readouterr().out
    assert "attention: OK" in capsys.readouterr().out
    bad = tmp_path / "attn_lt.py"
    bad.write_text(ATTENTION.replace("(rn[None, :] <= rm[:, None])", "(rn[None, :] < rm[:, None])"))
    assert main(["verify", str(bad), *args, "--op", "attention", "--causal", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    kinds = {v["kind"] for v in data["results"][0]["violations"]}
    assert "read-set" in kinds, data
    # the non-causal read set reads every key: the causal kernel is then the one reading too few
    assert main(["verify", str(good), *args, "--op", "attention"]) == 1
    assert "which attention reads there" in capsys.readouterr().out


def test_verify_op_errors(tmp_path: Path, capsys) -> None:
    f = tmp_path / "attn.py"
    f.write_text(ATTENTION.replace("O: Tensor(", "Out: Tensor(").replace("store(O[", "store(Out["))
    assert main(["verify", str(f), "--op", "attention"]) == 2
    assert "has the tensor O" in capsys.readouterr().err
    assert main(["verify", str(f), "--op", "nope"]) == 2
    assert "no read set for op 'nope'" in capsys.readouterr().err
