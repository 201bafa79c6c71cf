"""flight_trace.py -- the flight-destination example (examples/flight.py),
traced: which store ran, in what order, who waited for whom, how long each
took; and an action that causes another, with Dispatcher.enqueue.

Prints the rendered trace and writes it as a Chrome trace file (Trace Event
Format), to open in https://ui.perfetto.dev or chrome://tracing.

    make demo   (or: PYTHONPATH=bindings/python python3 examples/flight_trace.py [PATH])
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

import flux

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flight import Action, CityStore, CountryStore, FlightPriceStore  # noqa: E402


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "flight-trace.json")
    with flux.Dispatcher[Action]() as dispatcher:
        countries = CountryStore(dispatcher)
        cities = CityStore(dispatcher, countries)
        prices = FlightPriceStore(dispatcher, countries, cities)
        prices.register()
        cities.register()
        countries.register()

        # A view that reacts to a new price by logging it: an action caused
        # by an action, queued instead of refused ("cannot dispatch in the
        # middle of a dispatch").
        def on_price(action: Action) -> None:
            if action.type in ("city-update", "country-update"):
                dispatcher.enqueue(Action("price-logged", str(prices.price)))

        dispatcher.register(on_price, name="PriceLogger")

        with flux.Trace(dispatcher) as trace, contextlib.redirect_stdout(io.StringIO()):
            dispatcher.dispatch(Action("city-update", "paris"))
            dispatcher.dispatch(Action("country-update", "australia"))

    print(trace.render())
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    trace.write_chrome_trace(path)
    print(f"\nChrome trace written to {path}: open it in https://ui.perfetto.dev or chrome://tracing")


if __name__ == "__main__":
    main()
