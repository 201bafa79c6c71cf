"""flight.py -- the flight-destination example from Facebook's Flux docs (as
told in CLAFluxDispatcher's README), in Python over libflux.

Three stores: the selected country, the selected city, and the flight price.
When a country is selected the city store picks that country's default city,
so it must wait for the country store; the price store needs both, so it
waits for the city store. The stores are registered in reverse (price, city,
country) to show that wait_for(), not registration order, puts them in the
right order -- the same program as examples/flight.c.

    make demo        (or: PYTHONPATH=bindings/python python3 examples/flight.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import flux

DEFAULT_CITY = {"australia": "sydney", "france": "paris", "japan": "tokyo", "uk": "london"}
FARES = {"paris": 450, "sydney": 1320, "tokyo": 980, "london": 390}  # made up


@dataclass(frozen=True)
class Action:
    type: str  # "city-update" or "country-update"
    selected: str  # the city or the country


def or_none(value: Optional[str]) -> str:
    return value if value is not None else "(none)"


class CountryStore:
    def __init__(self, dispatcher: flux.Dispatcher[Action]) -> None:
        self.country: Optional[str] = None
        self.dispatcher = dispatcher

    def register(self) -> None:
        self.dispatch_token = self.dispatcher.register(self.on_dispatch)

    def on_dispatch(self, action: Action) -> None:
        if action.type == "country-update":
            self.country = action.selected
            print(f"  countryStore: {self.country}")


class CityStore:
    def __init__(self, dispatcher: flux.Dispatcher[Action], countries: CountryStore) -> None:
        self.dispatcher = dispatcher
        self.countries = countries
        self.city: Optional[str] = None

    def register(self) -> None:
        self.dispatch_token = self.dispatcher.register(self.on_dispatch)

    def on_dispatch(self, action: Action) -> None:
        if action.type == "city-update":
            self.city = action.selected
            print(f"  cityStore: {self.city}")
        elif action.type == "country-update":
            # The country store may not have run yet: make sure it has.
            print("  cityStore: waiting for countryStore")
            self.dispatcher.wait_for([self.countries.dispatch_token])
            self.city = DEFAULT_CITY.get(or_none(self.countries.country))
            print(f"  cityStore: {or_none(self.city)} (default for {self.countries.country})")


class FlightPriceStore:
    def __init__(self, dispatcher: flux.Dispatcher[Action], countries: CountryStore, cities: CityStore) -> None:
        self.dispatcher = dispatcher
        self.countries = countries
        self.cities = cities
        self.price = 0

    def register(self) -> None:
        self.dispatch_token = self.dispatcher.register(self.on_dispatch)

    def on_dispatch(self, action: Action) -> None:
        if action.type not in ("country-update", "city-update"):
            return
        # The price depends on the city, whichever action changed it. (The
        # README's version skips this wait on city-update because its price
        # store happens to be registered after the city store.)
        print("  flightPriceStore: waiting for cityStore")
        self.dispatcher.wait_for([self.cities.dispatch_token])
        self.price = FARES.get(or_none(self.cities.city), 0)
        print(f"  flightPriceStore: {self.price} for {or_none(self.cities.city)}, {or_none(self.countries.country)}")


def main() -> None:
    with flux.Dispatcher[Action]() as dispatcher:
        countries = CountryStore(dispatcher)
        cities = CityStore(dispatcher, countries)
        prices = FlightPriceStore(dispatcher, countries, cities)
        # Registered in reverse on purpose: wait_for puts them in order.
        prices.register()
        cities.register()
        countries.register()

        for action in (Action("city-update", "paris"), Action("country-update", "australia")):
            print(f"dispatch {action.type}: {action.selected}")
            dispatcher.dispatch(action)

        print(f"final state: country={or_none(countries.country)} city={or_none(cities.city)} price={prices.price}")


if __name__ == "__main__":
    main()
