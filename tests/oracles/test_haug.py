"""Haug's tables of European prices and greeks (as tabulated in QuantLib's test suite).

Source and conventions are in the header of shared/oracles/quantlib_tables.txt: continuous r and q,
t in years (QuantLib builds it as round(t * 360) days under Actual/360, which is exact for every row),
vega/rho/dividend rho per 1.00, theta per year, theta per day = theta / 365. Tolerance: the table's
own absolute 1e-4.
"""
import csv

import numpy as np
import pytest

import tickgpu


def read_table(path, kind):
    """Rows of one table (`price` or `greek`) of the file, as dicts of strings."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    header = None
    rows = []
    for line in lines:
        fields = next(csv.reader([line]))
        if fields[0] == "table":
            header = fields
        elif fields[0] == kind:
            rows.append(dict(zip(header, fields)))
    return rows


@pytest.fixture(scope="module")
def tables(shared_dir):
    path = shared_dir / "oracles" / "quantlib_tables.txt"
    prices, greek_rows = read_table(path, "price"), read_table(path, "greek")
    assert len(prices) == 43 and len(greek_rows) == 11, "the oracle file changed"
    return prices, greek_rows


def evaluate(row, dtype=np.float64):
    return tickgpu.greeks(float(row["spot"]), float(row["strike"]), float(row["t"]),
                          float(row["r"]), float(row["vol"]), float(row["q"]),
                          row["type"] == "call", dtype=dtype, backend="cpu")


def test_haug_prices(tables):
    prices, _ = tables
    for row in prices:
        g = evaluate(row)
        assert abs(float(g.price) - float(row["expected"])) <= float(row["abs_tol"]), row


def test_haug_greeks(tables):
    _, greek_rows = tables
    for row in greek_rows:
        g = evaluate(row)
        value = {
            "delta": g.delta,
            "gamma": g.gamma,
            "vega": g.vega,
            "theta": g.theta,
            "theta_per_day": g.theta / 365.0,
            "rho": g.rho,
            "dividendRho": g.phi,
            "elasticity": g.delta * float(row["spot"]) / g.price,
        }[row["greek"]]
        assert abs(float(value) - float(row["expected"])) <= float(row["abs_tol"]), row


def test_haug_prices_float32(tables):
    """float32 is good to about 1e-6 of the spot: Haug's 4 decimals at spot <= 500 hold too."""
    prices, _ = tables
    for row in prices:
        g = evaluate(row, np.float32)
        assert abs(float(g.price) - float(row["expected"])) <= float(row["abs_tol"]) + 1e-6 * float(row["spot"]), row
