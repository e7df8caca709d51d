"""Sequential gradient coding: SR-SGC, M-SGC and their GC-Rep variants as round-by-round schemes.

Krishnan, Ebrahimi, Khisti, *Sequential Gradient Coding for Straggler Mitigation* (ICLR 2023),
Sections 2-3 and App. D, E, G, J. A worker's plan in round ``t`` holds tasks of several jobs (job
``t`` must finish by round ``t + T``), so the simulator, trace replay and the runtime run these
schemes through the protocol of :mod:`gradcode.schemes.base` with no scheme-specific code.

* :mod:`~gradcode.schemes.sgc.srsgc`: :class:`SRSGC` (``sr-sgc``), :class:`SRSGCRep` (``sr-sgc-rep``);
* :mod:`~gradcode.schemes.sgc.msgc`: :class:`MSGC` (``m-sgc``), :class:`MSGCRep` (``m-sgc-rep``);
* :mod:`~gradcode.schemes.sgc.common`: the base codes, the wait-out rule (conformance of the
  effective straggler pattern) and the shared round bookkeeping;
* :mod:`~gradcode.schemes.sgc.tune`: parameter selection from a delay profile (App. J).

Example (Sec. 3.3.1)::

    >>> from gradcode.schemes.sgc import MSGC
    >>> s = MSGC(n=4, B=2, W=3, lam=2)
    >>> s.delay, s.load, sorted({float(x) * 32 for x in s.partition_sizes})
    (3, 0.375, [1.0, 3.0])
"""

from gradcode.schemes.sgc.common import BaseGC, Conformance, SequentialScheme
from gradcode.schemes.sgc.msgc import MSGC, MSGCRep, msgc_load, msgc_partition_sizes
from gradcode.schemes.sgc.srsgc import SRSGC, SRSGCRep, srsgc_s

__all__ = [
    "MSGC",
    "SRSGC",
    "BaseGC",
    "Conformance",
    "MSGCRep",
    "SRSGCRep",
    "SequentialScheme",
    "msgc_load",
    "msgc_partition_sizes",
    "srsgc_s",
]
