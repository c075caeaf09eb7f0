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


class TokenLM(nn.Module):
    """Embedding first: verify feeds it token ids below 50 and next-token targets."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.layers = nn.ModuleList(Block16() for _ in range(2))
        self.head = nn.Linear(16, 50)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class Block16(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x):
        return x + self.linear(x).tanh()


def token_lm():
    """Only a model, and a token one: no batch function."""
    return TokenLM()


def raises():
    return _load_weights("/nonexistent/weights.pt")


def _load_weights(path):
    raise FileNotFoundError(f"no weights at {path}")


def frozen():
    """A model with no trainable parameter: nothing to train or compare."""
    model = nn.Linear(4, 4)
    model.requires_grad_(False)
    return model
