def save_merged(model, path):
    model.save_pretrained(path)


def save_given(model, path, state):
    model.save_pretrained(path, state_dict=state)
