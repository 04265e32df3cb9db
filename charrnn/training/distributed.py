"""Several processes, one run: DDP under ``torchrun`` (docs/distributed.md), each rank a block of the streams,
rank 0 alone evaluating and writing; a lone process is a :class:`ProcessGroup` of one."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import NoReturn, TypeVar

import torch
import torch.distributed as dist

from charrnn.errors import CharrnnError, option

T = TypeVar("T")


class ProcessGroup:
    """The processes that train together: this base is a world of one, every collective the identity."""

    rank = 0  # this process's index among all processes
    world_size = 1  # number of processes

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that evaluates, logs and writes."""
        return self.rank == 0

    def rows(self, batch_size: int) -> slice:
        """This rank's block of the ``batch_size`` streams (a lone process's: all of them)."""
        if batch_size % self.world_size:
            raise CharrnnError(f"{option('batch_size')} {batch_size} does not split evenly over "
                               f"{self.world_size} processes; use a multiple of {self.world_size}")
        per_rank = batch_size // self.world_size
        return slice(self.rank * per_rank, (self.rank + 1) * per_rank)

    def reduce(self, values: list[float], device: torch.device, op: str = "sum") -> list[float]:
        """Element-wise ``sum`` or ``max`` of ``values`` over all ranks (one collective)."""
        return list(values)

    def from_main(self, value: T) -> T:
        """Rank 0's ``value``, on every rank."""
        return value

    def gather_rows(self, tensor: torch.Tensor, dim: int) -> torch.Tensor:
        """Every rank's block of ``tensor`` along ``dim``, in rank order (a collective: all ranks call it)."""
        return tensor

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The module a training step calls: the model itself."""
        return model


@dataclass(frozen=True)
class TorchrunGroup(ProcessGroup):
    """One of ``world_size`` processes that torchrun started, joined through torch.distributed."""

    rank: int  # this process's index among all processes, 0 .. world_size - 1
    world_size: int  # number of processes

    def reduce(self, values: list[float], device: torch.device, op: str = "sum") -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return tensor.tolist()

    def from_main(self, value: T) -> T:
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather_rows(self, tensor: torch.Tensor, dim: int) -> torch.Tensor:
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts, dim=dim)

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """DistributedDataParallel around ``model``: its backward pass averages the ranks' gradients."""
        return torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)


def _environment_int(name: str, default: str | None = None) -> int:
    if (value := os.environ.get(name, default)) is None:
        raise CharrnnError(f"WORLD_SIZE is set but {name} is not; start multi-process training with torchrun")
    try:
        return int(value)
    except ValueError:
        raise CharrnnError(f"environment variable {name}={value!r} is not a whole number; "
                           f"unset it, or start multi-process training with torchrun") from None


def world_size_from_environment() -> int:
    """``WORLD_SIZE`` as torchrun sets it; 1 when unset or not a number (join_from_environment says so)."""
    with contextlib.suppress(CharrnnError):
        return _environment_int("WORLD_SIZE", "1")
    return 1


def join_from_environment(device: str) -> tuple[ProcessGroup, str]:
    """Join torchrun's process group (gloo on cpu, nccl on cuda); return it and this rank's device."""
    if (world_size := _environment_int("WORLD_SIZE", "1")) <= 1:
        return ProcessGroup(), device
    rank, local_rank = _environment_int("RANK"), _environment_int("LOCAL_RANK", "0")
    if not 0 <= rank < world_size:
        raise CharrnnError(f"RANK {rank} is outside WORLD_SIZE {world_size}; start training with torchrun")
    if missing := [name for name in ("MASTER_ADDR", "MASTER_PORT") if name not in os.environ]:
        raise CharrnnError(f"WORLD_SIZE is set but {missing[0]} is not; start multi-process training with "
                           f"torchrun")
    if device == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise CharrnnError(f"local rank {local_rank} has no GPU ({torch.cuda.device_count()} visible); "
                               f"start at most that many processes per node")
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    elif device != "cpu":
        raise CharrnnError(f"multi-process training runs on cpu (gloo) or cuda (nccl), not {device}")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return TorchrunGroup(rank, world_size), device


def local_processes(group: ProcessGroup) -> int:
    """How many of the group's processes share this machine (torchrun's ``LOCAL_WORLD_SIZE``); 1 alone."""
    if group.world_size <= 1:
        return 1
    with contextlib.suppress(CharrnnError):
        return max(1, _environment_int("LOCAL_WORLD_SIZE", str(group.world_size)))
    return group.world_size


def leave(group: ProcessGroup) -> None:
    if isinstance(group, TorchrunGroup) and dist.is_initialized():
        dist.destroy_process_group()


def end_process(exit_code: int) -> NoReturn:
    """End a torchrun worker now, skipping the interpreter's shutdown: gloo's threads, which DDP keeps past
    ``destroy_process_group``, abort it (pytorch/pytorch#190489, docs/distributed.md). Files are closed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
