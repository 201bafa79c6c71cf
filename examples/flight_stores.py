"""flight_stores.py -- the flight-destination example (examples/flight.py)
with flux stores: country, city and price are ReduceStores routing
flux.Actions with @flux.handles, and a StoreGroup prints the itinerary once
per dispatch, after all three. The same program as examples/flight-stores.c.

    make demo        (or: PYTHONPATH=bindings/python python3 examples/flight_stores.py)
"""

from __future__ import annotations

from typing import Any, Optional

import flux

DEFAULT_CITY = {"australia": "sydney", "france": "paris", "uk": "london"}
FARES = {"paris": 450, "sydney": 1320, "london": 390}


class CountryStore(flux.ReduceStore[Optional[str]]):
    def get_initial_state(self) -> Optional[str]:
        return None

    @flux.handles("country-update")
    def on_country(self, state: Optional[str], action: flux.Action) -> Optional[str]:
        return action.payload


class CityStore(flux.ReduceStore[Optional[str]]):
    def __init__(self, dispatcher: flux.Dispatcher[Any], countries: CountryStore) -> None:
        self.countries = countries
        super().__init__(dispatcher)

    def get_initial_state(self) -> Optional[str]:
        return None

    @flux.handles("city-update")
    def on_city(self, state: Optional[str], action: flux.Action) -> Optional[str]:
        return action.payload

    @flux.handles("country-update")
    def on_country(self, state: Optional[str], action: flux.Action) -> Optional[str]:
        self.dispatcher.wait_for([self.countries.dispatch_token])
        return DEFAULT_CITY.get(self.countries.state or "")


class PriceStore(flux.ReduceStore[int]):
    def __init__(self, dispatcher: flux.Dispatcher[Any], cities: CityStore) -> None:
        self.cities = cities
        super().__init__(dispatcher)

    def get_initial_state(self) -> int:
        return 0

    def reduce(self, state: int, action: flux.Action) -> int:
        self.dispatcher.wait_for([self.cities.dispatch_token])
        return FARES.get(self.cities.state or "", 0)

    def are_equal(self, one: int, two: int) -> bool:
        return one == two  # prices are values, not identities


def main() -> None:
    with flux.Dispatcher[flux.Action]() as dispatcher:
        countries = CountryStore(dispatcher)
        cities = CityStore(dispatcher, countries)
        prices = PriceStore(dispatcher, cities)

        def itinerary() -> None:
            changed = [s.has_changed() for s in (countries, cities, prices)]
            print(f"  itinerary: {countries.state}, {cities.state}, {prices.state}  (changed: {changed})")

        flux.StoreGroup([countries, cities, prices], itinerary)
        for action in (
            flux.Action("city-update", "paris"),
            flux.Action("country-update", "australia"),
            flux.Action("city-update", "sydney"),
        ):
            print(f"dispatch {action.type}: {action.payload}")
            dispatcher.dispatch(action)


if __name__ == "__main__":
    main()
