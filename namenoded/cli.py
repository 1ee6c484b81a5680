"""``hanamenode`` (``python -m namenoded``): the NameNode command line with its elector.

``hanamenode format``, ``bootstrap-standby`` and ``run`` are ``hanamenode.cli``'s; this
module only hands ``run`` the ``failover`` layer's ``ActiveStandbyElector``, which
``NameNodeServer`` builds when ``dfs.ha.automatic-failover.enabled`` is true.
"""

from __future__ import annotations

from failover.elector import ActiveStandbyElector
from hanamenode.cli import namenode_cli

main = namenode_cli(elector_factory=ActiveStandbyElector)

if __name__ == "__main__":
    main()
