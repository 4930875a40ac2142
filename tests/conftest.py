from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# A calibration of this machine (dse.calibrate) must not change what the tests predict.
os.environ["DSE_CALIBRATION_DIR"] = tempfile.mkdtemp(prefix="dse-test-calibration-")
