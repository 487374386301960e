"""What a tampered reproducer's case.json names as its backend: importing it creates the file
$KVC_TAMPERED, which `kvconform replay` must never do unless the user names this backend."""
import os

with open(os.environ.get("KVC_TAMPERED", os.devnull), "w") as fh:
    fh.write("imported: replay executed code named by a reproducer\n")


def make():
    raise RuntimeError("called: replay executed code named by a reproducer")
