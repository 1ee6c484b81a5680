"""Hadoop-style XML configuration files: read them into ordered properties, write them back.

The format is Hadoop's ``*-site.xml``::

    <configuration>
      <property><name>dfs.nameservices</name><value>mycluster</value></property>
    </configuration>

This module knows only the file format (and ``ConfigError``, the one error of the ``conf``
package); what the keys mean is ``conf.settings``'s business (docs/operations.md §2).
"""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from xml.parsers import expat

__all__ = ["ConfigError", "ConfigValue", "Property", "parse_xml", "read_xml", "write_xml"]

# Children of <property> that Hadoop defines; we keep only name and value.
_PROPERTY_CHILDREN = frozenset({"name", "value", "description", "final", "source", "tag"})

ConfigValue = str | int | float | bool | os.PathLike[str]
"""What a configuration mapping may hold; everything is stored as its string form."""


class ConfigError(ValueError):
    """A configuration problem, as one line naming the file, then the key or line, then what.

    ``str(err)`` is e.g. ``ha-site.xml: dfs.qjournal.write-txns.timeout.ms: expected a
    duration, got 'abc'``; the parts are also kept as attributes for callers that want them.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.key = key
        self.line = line
        parts = []
        if source is not None:
            parts.append(source)
        if line is not None:
            parts.append(f"line {line}")
        if key is not None:
            parts.append(key)
        super().__init__(": ".join([*parts, message]))


@dataclass(frozen=True, slots=True)
class Property:
    """One ``<property>`` of a file, with the line it starts on (0 when built in memory)."""

    name: str
    value: str
    line: int = 0


def to_config_string(value: ConfigValue) -> str:
    """The string form of a mapping value: ``True`` -> ``"true"``, paths and numbers by str."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return os.fspath(value)


class _Reader:
    """Expat callbacks building the property list; expat gives us line numbers for errors."""

    def __init__(self, source: str, parser: expat.XMLParserType) -> None:
        self.source = source
        self.parser = parser
        self.stack: list[str] = []
        self.text: list[str] = []
        self.fields: dict[str, str] = {}
        self.property_line = 0
        self.properties: list[Property] = []

    def error(self, message: str) -> ConfigError:
        return ConfigError(message, source=self.source, line=self.parser.CurrentLineNumber)

    def start(self, tag: str, _attrs: dict[str, str]) -> None:
        depth = len(self.stack)
        if depth == 0 and tag != "configuration":
            raise self.error(f"expected <configuration> as the root element, got <{tag}>")
        if depth == 1 and tag != "property":
            raise self.error(f"unexpected <{tag}> in <configuration> (only <property>)")
        if depth == 2 and tag not in _PROPERTY_CHILDREN:
            raise self.error(f"unexpected <{tag}> in <property>")
        if depth >= 3:
            raise self.error(f"unexpected <{tag}> inside <{self.stack[-1]}>")
        if depth == 1:
            self.fields = {}
            self.property_line = self.parser.CurrentLineNumber
        elif depth == 2:
            if tag in self.fields:
                raise self.error(f"<property> has more than one <{tag}>")
            self.text = []
        self.stack.append(tag)

    def end(self, tag: str) -> None:
        self.stack.pop()
        depth = len(self.stack)
        if depth == 2:
            self.fields[tag] = "".join(self.text)
        elif depth == 1:
            self.finish_property()

    def chars(self, data: str) -> None:
        if len(self.stack) == 3:
            self.text.append(data)
        elif data.strip():
            raise self.error(f"unexpected text {data.strip()!r} in <{self.stack[-1]}>")

    def finish_property(self) -> None:
        name = self.fields.get("name", "").strip()
        if not name:
            raise ConfigError(
                "<property> without a <name>", source=self.source, line=self.property_line
            )
        if "value" not in self.fields:
            raise ConfigError(
                "<property> without a <value>",
                source=self.source,
                key=name,
                line=self.property_line,
            )
        self.properties.append(Property(name, self.fields["value"].strip(), self.property_line))

    def doctype(self, *_args: object) -> None:
        # Entities are the XML feature that turns a config file into a decompression bomb.
        raise self.error("DOCTYPE declarations are not allowed in configuration files")


def parse_xml(data: bytes | str, source: str) -> list[Property]:
    """Parse Hadoop-style XML into properties in file order; ``source`` names it in errors.

    A property defined twice is an error (Hadoop silently keeps the last, which hides typos
    in hand-edited files).
    """
    parser = expat.ParserCreate()
    reader = _Reader(source, parser)
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.chars
    parser.StartDoctypeDeclHandler = reader.doctype
    try:
        parser.Parse(data, True)
    except expat.ExpatError as err:
        raise ConfigError(
            f"malformed XML: {expat.errors.messages[err.code]} (column {err.offset + 1})",
            source=source,
            line=err.lineno,
        ) from None
    first_seen: dict[str, int] = {}
    for prop in reader.properties:
        if prop.name in first_seen:
            raise ConfigError(
                f"defined twice (first on line {first_seen[prop.name]})",
                source=source,
                key=prop.name,
                line=prop.line,
            )
        first_seen[prop.name] = prop.line
    return reader.properties


def read_xml(path: str | os.PathLike[str]) -> list[Property]:
    """Read and parse one file; a missing or unreadable file is a ``ConfigError``."""
    source = os.fspath(path)
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise ConfigError("is a directory, expected an XML file", source=source) from None
    except FileNotFoundError:
        raise ConfigError("no such file", source=source) from None
    except OSError as err:
        raise ConfigError(f"cannot read: {err.strerror}", source=source) from None
    return parse_xml(data, source)


def write_xml(mapping: Mapping[str, ConfigValue], path: str | os.PathLike[str]) -> Path:
    """Write ``mapping`` as a Hadoop-style XML file (atomically: temp file, then rename).

    Values are written in their string form (``True`` as ``true``); returns the path. The
    file is readable by its owner only (mode 0600): it may hold the ZooKeeper password.
    """
    root = ET.Element("configuration")
    for name, value in mapping.items():
        prop = ET.SubElement(root, "property")
        ET.SubElement(prop, "name").text = name
        ET.SubElement(prop, "value").text = to_config_string(value)
    ET.indent(root, space="  ")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            ET.ElementTree(root).write(out, encoding="UTF-8", xml_declaration=True)
            out.write(b"\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
