"""Models defined outside the package, as a user would write them: the tests name them as
``user_models:small_cnn`` (this folder is put on PYTHONPATH for the pipeline's processes)."""
import torch.nn as nn

from paper_repro.blocknet import BlockNet


def small_cnn(width: int = 4, in_channels: int = 3) -> nn.Sequential:
    """Three conv blocks; the default heads (average pool + linear) are added by the package."""
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU()),
        nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU()),
        nn.Sequential(nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU()),
    )


def small_mlp_net(width: int = 16, in_dim: int = 3 * 6 * 6, num_classes: int = 10) -> BlockNet:
    """A BlockNet with its own heads."""
    blocks = [nn.Sequential(nn.Flatten(), nn.Linear(in_dim, width), nn.Tanh()),
              nn.Sequential(nn.Linear(width, width), nn.Tanh()),
              nn.Sequential(nn.Linear(width, width), nn.Tanh())]
    return BlockNet(blocks, lambda i: nn.Linear(width, num_classes), name="small_mlp_net")


def not_a_model() -> int:
    return 3


def inplace_cnn(width: int = 4, in_channels: int = 3, inplace: bool = True) -> nn.Sequential:
    """Every layer a block of its own, as with ``torchvision.models.vgg11().features``: the
    ``ReLU(inplace=True)`` blocks begin (and end) with an operation that writes its input
    (``inplace=False``: the same net with ReLUs that do not)."""
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(inplace=inplace),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(inplace=inplace),
        nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU(inplace=inplace),
    )


class _Tokens(nn.Module):
    """Token embedding with learned positions: (N, T) token ids -> (N, T, width)."""

    def __init__(self, vocab: int, width: int, max_len: int = 512):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, width), nn.Embedding(max_len, width)

    def forward(self, x):
        import torch
        return self.embed(x) + self.pos(torch.arange(x.shape[1], device=x.device))


def byte_lm(vocab: int = 256, width: int = 16, depth: int = 3) -> nn.Sequential:
    """A token model as an nn.Sequential (per-token MLP blocks after the embedding): the
    default per-token heads make it a next-token language model."""
    return nn.Sequential(_Tokens(vocab, width),
                         *[nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth)])


def byte_lm_net(vocab: int = 256, width: int = 16, depth: int = 3) -> BlockNet:
    """The same as a BlockNet with its own heads and task="lm"."""
    blocks = list(byte_lm(vocab, width, depth))
    return BlockNet(blocks, lambda i: nn.Linear(width, vocab), task="lm", name="byte_lm_net")
