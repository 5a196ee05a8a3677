# Lit configuration for the llm pass tests. Run through ctest (llmc_passes_lit), which passes
# the build's bin directory; lit's scratch output goes to llmc_exec_root in the build tree.
import os

import lit.formats

config.name = "llmc-passes"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = lit_config.params.get(
    "llmc_exec_root", os.path.join(os.path.dirname(__file__), "..", "..", "build-mlir", "passes", "test"))

bin_dir = lit_config.params.get("llmc_bin_dir")
if not bin_dir or not os.path.exists(os.path.join(bin_dir, "llmc-opt")):
    lit_config.fatal("llmc-opt not found; pass --param llmc_bin_dir=<build>/bin (found %r)" % bin_dir)
filecheck_dir = os.path.dirname(lit_config.params.get("filecheck", "/usr/lib/llvm-16/bin/FileCheck"))
config.environment["PATH"] = os.pathsep.join([bin_dir, filecheck_dir, config.environment.get("PATH", os.environ["PATH"])])
