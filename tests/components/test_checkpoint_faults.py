"""Checkpoints that cannot be read or written (issue #33): a truncated file or a missing shard is named; resume=latest
falls back to the newest checkpoint that verifies and warns about the broken one; a save that runs out of disk space
keeps the previous checkpoint and says how much space it needed; resume=latest in a folder whose run died before its
first checkpoint says so and names train.run.overwrite=true. docs/faults.md describes each for users."""
import errno
import json
import re
import subprocess
from pathlib import Path

import pytest
import torch

from comarl.cli import main
from comarl.core.config_io import ConfigError
from demo_runs import demo_trainer
from comarl.runs import checkpoint as ckpt

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "configs/demo/writing.yaml")


def _trainer(out, **run):
    return demo_trainer(out, steps=4, **run)


def _save_at(trainer, *steps):
    """Checkpoints at these steps (no training needed: what is tested is the files)."""
    for s in steps:
        trainer.state.step = s
        trainer.save_checkpoint()
    return [trainer.config.run.output_dir + f"/checkpoint-{s}" for s in steps]


def _truncate(f: Path, keep: float = 0.5) -> None:
    data = f.read_bytes()
    f.write_bytes(data[:int(len(data) * keep)])


def test_manifest_lists_every_file_with_its_size_and_is_written_last(tmp_path):
    t = _trainer(tmp_path)
    path = Path(_save_at(t, 1)[0])
    manifest = json.loads((path / "manifest.json").read_text())
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert sorted(manifest["files"]) == files and "agent0/model.safetensors" in files
    assert all(manifest["files"][f]["size"] == (path / f).stat().st_size for f in files)
    assert manifest["bytes"] == sum(e["size"] for e in manifest["files"].values())
    assert "crc32" not in manifest["files"]["rng.pt"]  # checksums only with train.run.checkpoint_checksums
    assert not list(tmp_path.glob("*.tmp"))


def test_truncated_file_is_named_on_resume(tmp_path):
    t = _trainer(tmp_path)
    path = Path(_save_at(t, 2)[0])
    _truncate(path / "agent0" / "model.safetensors")
    with pytest.raises(Exception) as e:
        _trainer(tmp_path, resume=str(path))
    assert isinstance(e.value, ckpt.CheckpointError)
    assert str(path / "agent0" / "model.safetensors") in str(e.value) and "truncated" in str(e.value)


def test_unreadable_file_of_a_checkpoint_without_manifest_is_named(tmp_path):
    """Checkpoints written before manifests load unverified; a damaged file still names itself."""
    t = _trainer(tmp_path)
    path = Path(_save_at(t, 2)[0])
    (path / "manifest.json").unlink()
    _truncate(path / "agent1" / "optimizer.pt")
    with pytest.raises(Exception) as e:
        _trainer(tmp_path, resume="latest")
    assert isinstance(e.value, ckpt.CheckpointError)
    assert f"{path / 'agent1' / 'optimizer.pt'}: cannot be read" in str(e.value)


def test_resume_latest_falls_back_to_the_newest_checkpoint_that_verifies(tmp_path):
    t = _trainer(tmp_path, save_total_limit=3)
    c2, c3, c4 = map(Path, _save_at(t, 2, 3, 4))
    _truncate(c4 / "agent1" / "model.safetensors", 0.9)
    (c3 / "rng.pt").unlink()
    with pytest.warns(UserWarning) as warned:
        resumed = _trainer(tmp_path, resume="latest")
    assert resumed.state.step == 2 and resumed.resumed_from == str(c2)
    said = [str(w.message) for w in warned if "train.run.resume=latest" in str(w.message)]
    assert len(said) == 2
    assert "skipping checkpoint-4" in said[0] and str(c4 / "agent1" / "model.safetensors") in said[0]
    assert "skipping checkpoint-3" in said[1] and f"{c3 / 'rng.pt'}: missing" in said[1]


def test_no_checkpoint_that_verifies_is_an_error_naming_each(tmp_path):
    t = _trainer(tmp_path)
    c1, c2 = map(Path, _save_at(t, 1, 2))
    for c in (c1, c2):
        _truncate(c / "trainer_state.json")
    with pytest.warns(UserWarning), pytest.raises(ckpt.CheckpointError, match=r"no checkpoint in .* verifies"):
        _trainer(tmp_path, resume="latest")


def test_pruning_after_a_fallback_keeps_the_checkpoint_just_written(tmp_path):
    """Resumed from checkpoint-2 past a broken checkpoint-4: with save_total_limit=1, saving step 3 must not leave
    only the broken checkpoint-4 (the newest by step) behind."""
    t = _trainer(tmp_path, save_total_limit=2)
    _save_at(t, 2, 4)
    _truncate(tmp_path / "checkpoint-4" / "rng.pt")
    with pytest.warns(UserWarning, match="skipping checkpoint-4"):
        resumed = _trainer(tmp_path, resume="latest", save_total_limit=1)
    _save_at(resumed, 3)
    ckpt.verify_checkpoint(tmp_path / "checkpoint-3")
    assert not (tmp_path / "checkpoint-2").exists()


def test_checksums_catch_a_changed_byte_that_sizes_cannot(tmp_path):
    t = _trainer(tmp_path, checkpoint_checksums=True)
    path = Path(_save_at(t, 1)[0])
    f = path / "agent0" / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF  # same size, one byte flipped
    f.write_bytes(bytes(data))
    ckpt.verify_checkpoint(path, checksums=False)  # sizes alone cannot see it
    with pytest.raises(ckpt.CheckpointError, match=f"{f}: its bytes changed since it was written"):
        ckpt.verify_checkpoint(path)


def test_missing_shard_of_a_sharded_checkpoint_is_named(tmp_path):
    """A DCP checkpoint (save_sharded_checkpoint, one gloo rank) without one of its shard files."""
    import torch.distributed as tdist

    t = _trainer(tmp_path / "run")
    t.state.step = 2
    state = {"epoch": 0, "batch_in_epoch": 0, "counters": t.state.counters, "world_size": 1, "global_batch": 2,
             "run_id": t.run_id}
    tdist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        path = ckpt.save_sharded_checkpoint(tmp_path / "run", 2, t.agents, t.optimizers, t.schedulers, state)
    finally:
        tdist.destroy_process_group()
    shards = sorted((path / "agent1" / "dcp").glob("*.distcp"))
    assert shards and (path / "agent1" / "dcp" / ".metadata").exists()
    shards[0].unlink()
    with pytest.raises(Exception) as e:
        _trainer(tmp_path / "run", resume=str(path))
    assert isinstance(e.value, ckpt.CheckpointError)
    assert f"{shards[0]}: missing" in str(e.value)


class DiskFull:
    """An object whose writing fails as a full disk does (the portable fake of a full disk)."""

    def __reduce__(self):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_save_out_of_space_keeps_the_previous_checkpoint_and_says_what_it_needs(tmp_path):
    t = _trainer(tmp_path)
    good = Path(_save_at(t, 1)[0])
    need = json.loads((good / "manifest.json").read_text())["bytes"]
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.save_checkpoint(tmp_path, 2, t.agents, t.optimizers, t.schedulers, {"run_id": t.run_id},
                             extra={"critic.pt": DiskFull()})
    msg = str(e.value)
    assert "checkpoint-2 was not written: no space left" in msg and f"{good} is intact" in msg
    said = re.search(r"needs about (\d+\.\d) MB \((as checkpoint-1 took|at least what was written before the disk "
                     r"filled)\)", msg)
    assert said and float(said.group(1)) >= round(need / 1e6, 1), msg
    assert not (tmp_path / "checkpoint-2.tmp").exists() and not (tmp_path / "checkpoint-2").exists()
    ckpt.verify_checkpoint(good)
    assert _trainer(tmp_path, resume="latest").state.step == 1


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs (root only; skipped elsewhere, where the DiskFull fake above covers the same path)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()[:100]})")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_real_full_disk_keeps_the_previous_checkpoint(small_disk):
    """An untrained tiny team's checkpoint is 1.3 MB: the first fits the 2 MB disk, the second does not (safetensors
    says so; torch.save would say only 'unexpected pos', and then the probe file finds the disk full)."""
    t = _trainer(small_disk)
    good = Path(_save_at(t, 1)[0])
    with pytest.raises(ckpt.CheckpointError, match=r"checkpoint-2 was not written: no space left .* needs about "
                                                   r"1\.3 MB \(as checkpoint-1 took\)") as e:
        _save_at(t, 2)
    assert "free now" in str(e.value) and f"{good} is intact" in str(e.value)
    assert sorted(p.name for p in small_disk.glob("checkpoint-*")) == ["checkpoint-1"]
    ckpt.verify_checkpoint(good)
    with pytest.raises(ckpt.CheckpointError, match="checkpoint-3 was not written: no space left"):
        ckpt.save_checkpoint(small_disk, 3, [], [], [], {"run_id": t.run_id},  # torch.save fills the disk
                             extra={"big.pt": torch.zeros(500_000)})
    assert sorted(p.name for p in small_disk.glob("checkpoint-*")) == ["checkpoint-1"]


def test_first_save_out_of_space_estimates_from_the_tensors(tmp_path):
    """No earlier checkpoint to go by, and the disk full at the first file: the weights and optimiser state (none
    yet) of two tiny agents, 2 x 0.56 MB."""
    def disk_full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    t = _trainer(tmp_path)
    t.agents[0].model.save_pretrained = disk_full
    with pytest.raises(ckpt.CheckpointError, match=r"needs about 1\.1 MB \(its tensors alone\).*No earlier "
                                                   r"checkpoint of this run exists"):
        ckpt.save_checkpoint(tmp_path, 1, t.agents, t.optimizers, t.schedulers, {"run_id": t.run_id})


def test_other_save_errors_are_not_called_a_full_disk(tmp_path):
    class Broken:
        def __reduce__(self):
            raise TypeError("cannot pickle this")

    t = _trainer(tmp_path)
    with pytest.raises(TypeError, match="cannot pickle this"):
        ckpt.save_checkpoint(tmp_path, 1, t.agents, t.optimizers, t.schedulers, {"run_id": t.run_id},
                             extra={"x.pt": Broken()})
    assert not (tmp_path / "checkpoint-1.tmp").exists()


def test_resume_latest_after_a_run_died_before_its_first_checkpoint(tmp_path, capsys):
    """The CLI prints one line naming train.run.overwrite=true (status 2), before any model loads."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text('{"run_id": "abc"}')
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    (out / "checkpoint-2.tmp").mkdir()  # killed while writing its first checkpoint
    assert main(["train", DEMO, f"train.run.output_dir={out}", "train.run.resume=latest"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "the run in" in err and "stopped before its first checkpoint (checkpoint-2.tmp is a save that never " \
                                   "finished)" in err and "train.run.overwrite=true" in err


def test_resume_latest_in_an_empty_folder_says_there_is_no_run(tmp_path):
    with pytest.raises(ConfigError, match="holds no run to continue .* drop train.run.resume"):
        _trainer(tmp_path / "new", resume="latest")


def test_a_checkpoint_from_before_global_batch_and_run_ids_is_refused_by_name(tmp_path):
    t = _trainer(tmp_path)
    path = Path(_save_at(t, 2)[0])
    state_file = path / "trainer_state.json"
    state = json.loads(state_file.read_text())
    del state["global_batch"], state["run_id"]
    state_file.write_text(json.dumps(state))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["trainer_state.json"]["size"] = state_file.stat().st_size  # the file is whole, only older
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ckpt.CheckpointError, match=r"trainer_state.json lacks run_id, global_batch: a checkpoint of "
                                                   r"a comarl before 0.1"):
        _trainer(tmp_path, resume=str(path))
