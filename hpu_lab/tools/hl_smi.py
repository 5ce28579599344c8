"""``hl-smi``: what a Gaudi host's System Management Interface answers, for the emulated cards.

Installed as the ``hl-smi`` command of the venv and as ``python -m hpu_lab hl-smi``; ``python -m
hpu_lab run`` puts it on the PATH of the script and of everything it starts. Clients read it:
lightning-habana parses ``hl-smi -v`` for the SynapseAI version (and refuses fp8 below 1.14),
DeepSpeed's tests count ``Module ID`` lines of ``hl-smi -L``, CI scripts ask ``hl-smi -Q module_id
-f csv,noheader``.

The host has ``HPU_LAB_HOST_CARDS`` cards (8 by default: an HLS-2/HLS-3 server), each the card
``HPU_LAB_DEVICE`` names (its product name, HBM size), on the SynapseAI version hpu_lab follows.
What only hardware has is "N/A", as hl-smi prints for a sensor it cannot read: temperature, power,
utilization, PCI bus, firmware (the version string's ``fw-`` part is 0.0.0). Memory use is N/A as
well: an emulated card's memory lives inside the process using it (``torch.hpu.memory_stats()``
there), which this separate process cannot see.

Options: none (the summary table), ``-v``/``--version``, ``-L``/``--list-aips`` and ``-q``/``--query``
(each card's details), ``-Q``/``--query-aip FIELDS`` with ``-f csv[,noheader][,nounits]``, ``-h``.
Anything else is refused with hl-smi's usage, exit code 2.
"""
from __future__ import annotations

import datetime
import sys

from .closed_pipe import quiet_when_reader_leaves

PRODUCT = {"gaudi": "HL-205", "gaudi2": "HL-225", "gaudi3": "HL-325L"}
FIELDS = ("timestamp", "name", "bus_id", "driver_version", "temperature.aip", "module_id", "utilization.aip",
          "memory.total", "memory.free", "memory.used", "index", "serial", "uuid", "power.draw")
USAGE = """usage: hl-smi [options]   (hpu_lab: the emulated Gaudi host)
  -v, --version            version information
  -L, --list-aips          list every Gaudi device, with its details
  -q, --query              the same details
  -Q, --query-aip FIELDS   comma-separated fields, with -f csv[,noheader][,nounits]; fields:
                           """ + ", ".join(FIELDS) + """
  -h, --help               this message"""


def _synapse() -> str:
    from ..compat.optimum import SYNAPSE_VERSION
    return SYNAPSE_VERSION


def _cards():
    from .. import config
    from ..perfmodel.cards import DEVICES
    name = config.get("HPU_LAB_DEVICE")
    return name, DEVICES[name], config.get("HPU_LAB_HOST_CARDS")


def version_line() -> str:
    return f"Habanalabs hl-smi/hlml version hl-{_synapse()}-fw-0.0.0 (hpu_lab emulation)"


def _field(field, i, card_name, card, units):
    mib = card.hbm_bytes // 2**20
    values = {
        "timestamp": datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y"),
        "name": PRODUCT[card_name], "bus_id": "N/A", "driver_version": _synapse(),
        "temperature.aip": "N/A", "module_id": str(i), "utilization.aip": "N/A",
        "memory.total": f"{mib} MiB" if units else str(mib), "memory.free": "N/A", "memory.used": "N/A",
        "index": str(i), "serial": f"HPULAB{i:04d}", "uuid": f"01-hpulab-{card_name}-{i:04d}",
        "power.draw": "N/A",
    }
    return values[field]


def query_csv(fields, fmt) -> str:
    opts = fmt.split(",")
    if opts[0] != "csv" or any(o not in ("noheader", "nounits") for o in opts[1:]):
        raise ValueError(f"hl-smi: unsupported format {fmt!r} (csv[,noheader][,nounits])")
    wanted = [f.strip() for f in fields.split(",") if f.strip()]
    bad = [f for f in wanted if f not in FIELDS]
    if bad or not wanted:
        raise ValueError(f"hl-smi: unknown query field(s) {', '.join(bad) or '(none given)'}; fields: {', '.join(FIELDS)}")
    card_name, card, n = _cards()
    units = "nounits" not in opts
    lines = [] if "noheader" in opts else [", ".join(wanted)]
    for i in range(n):
        lines.append(", ".join(_field(f, i, card_name, card, units) for f in wanted))
    return "\n".join(lines)


def details() -> str:
    card_name, card, n = _cards()
    out = [f"================ HL-SMI LOG ================", f"Timestamp : {_field('timestamp', 0, card_name, card, True)}",
           f"Driver Version : {_synapse()}", f"Nic Driver Version : N/A", ""]
    for i in range(n):
        out += [f"[{i}] AIP (accel{i}) N/A",
                f"\tProduct Name\t\t\t: {PRODUCT[card_name]} ({card.title}, emulated by hpu_lab)",
                f"\tSerial Number\t\t\t: HPULAB{i:04d}",
                f"\tModule ID\t\t\t: {i}",
                f"\tFirmware [FIT] Version\t\t: N/A",
                f"\tMemory Usage",
                f"\t\tTotal\t\t\t: {card.hbm_bytes // 2**20} MiB",
                f"\t\tUsed\t\t\t: N/A",
                f"\t\tFree\t\t\t: N/A",
                f"\tTemperature\t\t\t: N/A",
                f"\tPower Draw\t\t\t: N/A", ""]
    return "\n".join(out)


def table() -> str:
    card_name, card, n = _cards()
    w = 79
    bar = "+" + "-" * (w - 2) + "+"
    out = [bar, f"| {'HL-SMI Version:':<24}{('hl-' + _synapse() + '-fw-0.0.0'):>51} |",
           f"| {'Driver Version:':<24}{_synapse():>51} |",
           "|-------------------------------+----------------------+----------------------+",
           "| AIP  Name       Persistence-M| Bus-Id        Disp.A | Volatile Uncor-Events|",
           "| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | AIP-Util  Compute M. |",
           "|===============================+======================+======================|"]
    mem = f"N/A / {card.hbm_bytes // 2**20}MiB"
    for i in range(n):
        out.append(f"| {i:>3}  {PRODUCT[card_name]:<14}{'N/A':>10} | {'N/A':<12}{'N/A':>8} | {'N/A':>20} |")
        out.append(f"| N/A   N/A   N/A    N/A / N/A  | {mem:>20} | {'N/A':>4}{'N/A':>16} |")
        out.append("|-------------------------------+----------------------+----------------------+")
    out += ["| Compute Processes:                                               AIP Memory |",
            "|  AIP       PID   Type   Process name                             Usage      |",
            "|=============================================================================|",
            "|  (emulated cards: each process's use is in its torch.hpu.memory_stats())    |",
            bar]
    return "\n".join(out)


@quiet_when_reader_leaves
def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not argv:
            print(table())
        elif argv[0] in ("-h", "--help"):
            print(USAGE)
        elif argv[0] in ("-v", "--version"):
            print(version_line())
        elif argv[0] in ("-L", "--list-aips", "-q", "--query"):
            print(details())
        elif argv[0] in ("-Q", "--query-aip"):
            if len(argv) < 2:
                raise ValueError("hl-smi: -Q needs a list of fields")
            fmt = "csv"
            if len(argv) > 2:
                if argv[2] != "-f" or len(argv) != 4:
                    raise ValueError(f"hl-smi: unexpected arguments {' '.join(argv[2:])} (-Q FIELDS -f csv[,noheader])")
                fmt = argv[3]
            print(query_csv(argv[1], fmt))
        else:
            raise ValueError(f"hl-smi: option {argv[0]!r} is not supported by hpu_lab's hl-smi")
    except ValueError as e:
        print(f"{e}\n\n{USAGE}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
