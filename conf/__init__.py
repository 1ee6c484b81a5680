"""Configuration: typed settings from Hadoop-style XML, gRPC servers/channels, logging set-up.

The one place that reads configuration files and makes gRPC servers and channels
(docs/architecture.md §2.2 ``conf/``, docs/operations.md §2). Everything else receives
``Settings`` (or one of its parts)::

    from conf import load_settings
    settings = load_settings(path)          # path, or None for $HANAMENODE_CONF
    jn = settings.journalnode("jn1")
"""

from conf.keys import KEYS, QJournalUri, parse_duration, parse_qjournal_uri
from conf.settings import (
    CONF_ENV,
    ClientSettings,
    HASettings,
    JournalNodeSettings,
    NameNodeSettings,
    QJMSettings,
    RPCSettings,
    Settings,
    TLSSettings,
    ZKSettings,
    load_settings,
)
from conf.xmlconf import ConfigError, read_xml, write_xml

__all__ = [
    "CONF_ENV",
    "KEYS",
    "ClientSettings",
    "ConfigError",
    "HASettings",
    "JournalNodeSettings",
    "NameNodeSettings",
    "QJMSettings",
    "QJournalUri",
    "RPCSettings",
    "Settings",
    "TLSSettings",
    "ZKSettings",
    "load_settings",
    "parse_duration",
    "parse_qjournal_uri",
    "read_xml",
    "write_xml",
]
