"""The store: the one owner of everything tokformer keeps on disk.

- run directories (:mod:`.run_dir`): training state, to resume exactly;
- checkpoints, whole or sharded behind one interface (:mod:`.checkpoints`);
- model folders, what leaves a run (:mod:`.folder`);
- what a path holds, read once (:mod:`.source`), other libraries' formats registered by
  :mod:`tokformer.interop` (:mod:`.formats`), and the one loader (:mod:`.loader`).

Every folder it writes appears whole or not at all (:mod:`tokformer.atomic`). It sits between the
engine and the runtime: ``engine -> store -> runtime -> core``; interop registers into it.
"""

from tokformer.store.folder import save_pretrained
from tokformer.store.formats import Format, register_format
from tokformer.store.loader import Predictor, from_pretrained, load, load_model, load_run, saved_task_name
from tokformer.store.source import Source, describe

__all__ = ["Format", "Predictor", "Source", "describe", "from_pretrained", "load", "load_model", "load_run",
           "register_format", "save_pretrained", "saved_task_name"]
