"""The `model` floor: a model file made ready and fitted: the dialect patch and the memory plan."""
