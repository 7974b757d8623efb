from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__version__: str

def count_text(text: str) -> int: ...
def count_texts(texts: Iterable[str]) -> npt.NDArray[np.int64]: ...
