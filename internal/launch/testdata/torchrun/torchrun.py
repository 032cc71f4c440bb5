"""torch's own torchrun (torch.distributed.run), for the end-to-end tests.

Debian 12's torch 1.13 cannot start any worker under Python 3.11: its
Std.from_str, which parses --redirects and --tee, compares enum members
with ints in a way Python 3.11 no longer allows, returns None, and the
agent then fails. Where that is so, this wrapper parses those two values
itself; everything else is torch's.
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api

if api.Std.from_str("0") is None:
    def _from_str(vm):
        if re.fullmatch(r"[0-3]", vm):
            return api.Std(int(vm))
        return {int(i): api.Std(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    api.Std.from_str = staticmethod(_from_str)

from torch.distributed.run import main

if __name__ == "__main__":
    sys.exit(main())
