"""Released ELECTRA models by name: the catalog, verified downloads, the cache.

`catalog` names the models and their sources, `download` fetches files with their checksums
checked, `fetch` brings a catalog entry's files to this machine, `cache` keeps converted
models under `$ELECTRA_TF_HOME`. `electra_tf.convert.resolve` ties them to the converters;
every `from_pretrained(name)` gives the restored model, `electra-presets` lists the
catalog. Nothing here imports TensorFlow.
"""
