from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def build(net):
    # TODO(fsdp2-port): F2P002 FSDP(...) left as is (its model stays FSDP1 because of F2P010 at line 18 (it may act on any model here), F2P010 at line 37 (it may act on any model here))
    return FSDP(net)


def generate(model, prompts):
    # a config read from the value: FSDP1's flat-parameter list has no max_seq_len
    limit = model.params.max_seq_len
    params = model.params
    assert len(prompts) <= params.max_batch_size
    policy = model.mixed_precision
    return limit, policy.dtype


def flat(model):
    # TODO(fsdp2-port): F2P010 params: FSDP1 internal; FSDP2 keeps the original modules and parameters (no wrapper, no flat parameter) (it may act on any model of this run: they all stay FSDP1 until it is ported)
    return model.params.count(None)  # a list's own method: perhaps FSDP1's flat parameters


class Sampler:
    def __init__(self, policy_model):
        self.model_params = policy_model.params

    def limit(self):
        return self.model_params.max_seq_len


def instantiate(config):
    # latent diffusion's configs: a mapping spread with ** or read by key is no flat-parameter list
    vae = build(VQModel(**config.model.params))
    ckpt = config.model.params["ckpt_path"]
    return vae, ckpt


def first_flat(model):
    # TODO(fsdp2-port): F2P010 params: FSDP1 internal; FSDP2 keeps the original modules and parameters (no wrapper, no flat parameter) (it may act on any model of this run: they all stay FSDP1 until it is ported)
    return model.params[0]  # a list's element: perhaps FSDP1's flat parameters
