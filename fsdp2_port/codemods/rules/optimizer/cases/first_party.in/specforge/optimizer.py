class BF16Optimizer:
    def __init__(self, model, lr):
        self.model, self.lr = model, lr
