"""Experience maker and samples generator of openrlhf-ada (see each module)."""
