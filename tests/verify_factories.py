"""Model factories that tests hand to `fsdp2-port verify --model tests.verify_factories:NAME`."""

from torch import nn


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 10)

    def forward(self, x):
        return x + self.linear(x).tanh()


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(3))
        self.head = nn.Linear(10, 3)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def stack():
    """Only a model: verify makes regression batches and uses the output's mean square."""
    return Stack()


def not_a_model():
    return 42
