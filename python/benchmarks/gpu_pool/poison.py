# A preload that initialises CUDA at import: the pool must refuse to fork after it.
import torch
torch.cuda.init()
