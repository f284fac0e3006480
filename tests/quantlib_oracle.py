"""QuantLib as an oracle for European options: AnalyticEuropeanEngine on flat curves.

Maturities are whole days under Actual365Fixed, so QuantLib's year fraction is exactly days / 365
and both sides price the same t. Rates, dividend yield and vol are quotes, so one engine serves
every option.
"""
from __future__ import annotations

import numpy as np
import pytest

ql = pytest.importorskip("QuantLib")

FIRST_ORDER = {
    "price": "NPV",
    "delta": "delta",
    "gamma": "gamma",
    "vega": "vega",
    "theta": "theta",          # per year
    "rho": "rho",
    "phi": "dividendRho",
}


class QuantLibEuropean:
    def __init__(self):
        self.today = ql.Date(15, ql.June, 2026)
        ql.Settings.instance().evaluationDate = self.today
        dc = ql.Actual365Fixed()
        self.spot, self.rate, self.div, self.vol = (ql.SimpleQuote(x) for x in (100.0, 0.0, 0.0, 0.2))
        process = ql.BlackScholesMertonProcess(
            ql.QuoteHandle(self.spot),
            ql.YieldTermStructureHandle(ql.FlatForward(self.today, ql.QuoteHandle(self.div), dc)),
            ql.YieldTermStructureHandle(ql.FlatForward(self.today, ql.QuoteHandle(self.rate), dc)),
            ql.BlackVolTermStructureHandle(
                ql.BlackConstantVol(self.today, ql.NullCalendar(), ql.QuoteHandle(self.vol), dc)),
        )
        self.engine = ql.AnalyticEuropeanEngine(process)

    def option(self, strike, days, call):
        kind = ql.Option.Call if call else ql.Option.Put
        opt = ql.VanillaOption(ql.PlainVanillaPayoff(kind, float(strike)),
                               ql.EuropeanExercise(self.today + int(days)))
        opt.setPricingEngine(self.engine)
        return opt

    def first_order(self, spot, strike, days, rate, vol, div, call) -> dict[str, np.ndarray]:
        """Price and first-order greeks of each option (arrays of equal length)."""
        n = len(spot)
        out = {k: np.empty(n) for k in FIRST_ORDER}
        for i in range(n):
            self.set_market(spot[i], rate[i], vol[i], div[i])
            opt = self.option(strike[i], days[i], call[i])
            for k, method in FIRST_ORDER.items():
                out[k][i] = getattr(opt, method)()
        return out

    def set_market(self, spot, rate, vol, div):
        self.spot.setValue(float(spot))
        self.rate.setValue(float(rate))
        self.vol.setValue(float(vol))
        self.div.setValue(float(div))
