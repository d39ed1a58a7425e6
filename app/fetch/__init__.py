"""The `fetch` floor: where models come from: the catalog, the Hugging Face Hub browser and the set-up pipeline."""
