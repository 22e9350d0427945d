# A worker that initialises CUDA on its GPU, forms a process group with NCCL, and times it.
import os, sys, time
t0 = time.time()
import torch, torch.distributed as dist
t1 = time.time()
x = torch.ones(1024, 1024, device="cuda")
torch.cuda.synchronize()
t2 = time.time()
dist.init_process_group("nccl")
y = torch.ones(4, device="cuda"); dist.all_reduce(y); torch.cuda.synchronize()
t3 = time.time()
print(f"rank {os.environ['RANK']} ppid={os.getppid()} dev={torch.cuda.get_device_name()} "
      f"visible={os.environ.get('CUDA_VISIBLE_DEVICES')} sum={float((x @ x).sum())} allreduce={y.tolist()} "
      f"import={t1-t0:.3f}s cuda_init={t2-t1:.3f}s nccl={t3-t2:.3f}s", flush=True)
dist.destroy_process_group()
